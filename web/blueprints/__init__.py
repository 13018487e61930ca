"""The web UI's blueprints, one per page family."""
