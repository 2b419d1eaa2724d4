"""Postgres access: URLs, engines, the embedded server, tables and migrations."""
