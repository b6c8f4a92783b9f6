"""`scrapy crawl patent`: the patent rounds of the task named in config.ini (or `-a task=NAME`)."""

from cnkispider.spiders.base import RoundSpider


class PatentSpider(RoundSpider):
    name = "patent"
    doc_type = "patent"
