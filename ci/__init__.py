"""The A/B bot's command line (``python -m ci``); the packages it drives are in ci/README.md."""
