"""The report side: it holds the token and never imports ``ci.runner``. It reads results.json as
untrusted input, judges it again, renders it and posts it to the pull request."""
