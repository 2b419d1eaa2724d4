"""Script jobs: what a script worker checks about its host before it runs anything."""
