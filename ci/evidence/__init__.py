"""The evidence every stage reads: one test's result, a case across both sides, a whole run,
judged once and stored as results.json; loading it checks every shape and bound."""
