"""`scrapy crawl paper`: the paper rounds of the task named in config.ini (or `-a task=NAME`)."""

from cnkispider.spiders.base import RoundSpider


class PaperSpider(RoundSpider):
    name = "paper"
    doc_type = "paper"
