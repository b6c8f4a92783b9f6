"""What a running crawl's components share, under all of them: the Scrapy add-on that
installs the defaults, the crawl context (opened by flow control), blocking work off the
reactor, and the engine slot's three private reads."""
