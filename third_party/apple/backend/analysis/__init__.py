"""Analyses over our IR that the lowering consults (axis info for vectorisation)."""
