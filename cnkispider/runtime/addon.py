"""The Scrapy add-on that installs the crawler's defaults (``ADDONS`` in ``cnkispider.settings``).

Scrapy applies add-ons when a crawler is built, before any component reads its settings. This
one sets every name of :mod:`cnkispider.default_settings` at the ``addon`` priority: above
Scrapy's own defaults, below the project settings, config.ini, ``-s`` and ``custom_settings``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cnkispider import default_settings

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


class DefaultSettings:
    """Installs :mod:`cnkispider.default_settings` (one home for each default)."""

    def update_settings(self, settings: BaseSettings) -> None:
        settings.setmodule(default_settings, priority="addon")


#: The ``ADDONS`` setting of every crawler of this project.
ADDONS = {f"{DefaultSettings.__module__}.{DefaultSettings.__qualname__}": 0}
