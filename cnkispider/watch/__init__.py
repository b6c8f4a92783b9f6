"""Watching a crawl for what must stop or tell someone: CNKI's refusals turned into halts
and self-stops, the drift of its pages, the refresh of a round's counts, the console's log
and the webhook messages."""
