"""The edgewatch lab (distribution ``edgewatch-lab``): what tests, demonstrates and measures
edgewatch, never what runs on a cluster. It imports the product; the product never imports it
(pyproject.toml's import-linter contracts)."""
