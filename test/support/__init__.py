"""Helpers shared by several test folders (importable as `support.*`: pyproject's pytest `pythonpath` puts
test/ on the path). Fixtures live in conftest.py; these modules hold plain functions, data and stand-ins."""
