"""The report side: it holds the token and never imports ``abtest``. It reads results.json as
untrusted input, judges it again, renders it and posts it to the pull request."""
