"""The one harness every reproduction and study shares."""
