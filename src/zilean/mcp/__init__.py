"""The mcp service: the Model Context Protocol endpoint for AI agents, at `/mcp`."""
