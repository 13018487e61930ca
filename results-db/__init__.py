"""Results database: models, migrations, embedded cluster, ingest, statistics and tables."""
