"""The ui service: the admin SPA and the server-rendered login, logout and invite pages."""
