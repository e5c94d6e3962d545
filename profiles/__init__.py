"""Measured (model, GPU) profiles for llmsim: committed compact data in ``profiles/data`` and the tools
that derive (``profiles.build``), validate (``profiles.validate``, ``profiles.replay``) and measure
(``profiles.profile``) them. See docs/profiles.md.
"""
