"""Measured (model, GPU) profiles for llmsim: committed compact data in ``profiles/data`` and the tools
that derive (``llmsim.profiles.build`` with one provider chain per part in ``llmsim.profiles.providers``), check
(``llmsim.profiles.compare``), validate (``llmsim.profiles.validate``, ``llmsim.profiles.replay``) and measure
(``llmsim.profiles.profile``) them. See docs/profiles.md.
"""
