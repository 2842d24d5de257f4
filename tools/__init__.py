"""The maintainer tools: the patch series, the release watch and the benchmarks. They may use
``ci``; ``ci`` never imports them."""
