"""Measured (model, GPU) profiles for llmsim: committed compact data in ``profiles/data`` and the tools
that derive (``profiles.build`` with one provider chain per part in ``profiles.providers``), check
(``profiles.compare``), validate (``profiles.validate``, ``profiles.replay``) and measure
(``profiles.profile``) them. See docs/profiles.md.
"""
