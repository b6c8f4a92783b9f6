"""Starting crawls: config.ini mapped onto Scrapy's settings, the checks before a crawl
(preflight, the `-s` settings), the worker processes of `run` and `run --reload`."""
