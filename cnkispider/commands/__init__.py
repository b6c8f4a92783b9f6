"""The project's Scrapy commands (``COMMANDS_MODULE`` in cnkispider/settings.py): ``crawl``."""
