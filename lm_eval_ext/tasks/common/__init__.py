"""Helpers shared by several task folders."""
