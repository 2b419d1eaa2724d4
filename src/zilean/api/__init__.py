"""The admin JSON API served by core, and the HTTP pieces every service shares."""
