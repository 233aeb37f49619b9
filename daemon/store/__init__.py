"""The recorder's SQLite store: schema, the one writer (and its lock), maintenance (rollups,
retention), read-only readers and the attribution/cost facts. Only this package touches a
Store's private state."""
