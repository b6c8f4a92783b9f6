"""The operator's words: the gettext catalogues' reader (i18n.py), the crawler's
vocabulary in two languages, and the catalogues themselves (locale/, docs/TRANSLATING.md)."""
