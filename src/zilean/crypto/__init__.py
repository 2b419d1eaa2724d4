"""Keys and encryption for secrets at rest."""
