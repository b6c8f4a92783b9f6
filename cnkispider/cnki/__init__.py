"""What the crawler knows about CNKI, kept in one package because CNKI changes every few years.

- :mod:`cnkispider.cnki.protocol`: kns8s request building (resources, QueryJson, grid forms,
  the result cap, URLs), pure and with the base URL injected so the stand-in site can be used.
- :mod:`cnkispider.cnki.listgrid`, :mod:`cnkispider.cnki.detailpage`: the list grid's and the
  detail pages' parsers (HTML in, data out), both reading HTML through :mod:`cnkispider.cnki.markup`.
- :mod:`cnkispider.cnki.refusals`: CNKI's ways of saying no, told apart from usable pages.

Nothing is imported here, so importing one module does not load the others.
"""
