"""Helpers the tests import (not tests themselves)."""
