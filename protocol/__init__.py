"""Crucible's shared core: chain layer, typed configuration and the formats every role uses."""
