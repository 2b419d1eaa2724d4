"""Accounts, sessions, roles and permissions."""
