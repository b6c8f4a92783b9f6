"""`scrapy crawl achievement`: the achievement rounds of the task named in config.ini (or `-a task=NAME`)."""

from cnkispider.spiders.base import RoundSpider


class AchievementSpider(RoundSpider):
    name = "achievement"
    doc_type = "achievement"
