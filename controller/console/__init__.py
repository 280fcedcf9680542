"""The web console (templates and static assets, served by the API). Built by a later issue."""
