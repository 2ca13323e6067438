"""Clients of the stage services, one per stage, that speak domain types and raise domain errors."""
