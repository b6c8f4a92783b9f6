"""The operator's files: `cnkispider export`'s formats (CSV, JSON lines, Excel, RIS,
BibTeX, CSL JSON, EndNote) and the bibliographic records they are made from (CNKI's own
GetExport is cnkispider/cnki/'s)."""
