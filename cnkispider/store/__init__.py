"""What the crawl keeps: the database (its one factory, schema and upgrades, the MySQL
and Redis connections, the rights of a worker's account), the documents' storage and each
round's ledger (docs/RELIABILITY.md)."""
