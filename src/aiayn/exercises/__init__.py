"""Support for the chapters' exercises: ``check`` functions that compare a reader's own
function with the package's and name the mistake (checks).
"""
