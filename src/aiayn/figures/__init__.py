"""Figures and explorers, one module per chapter's topic: the static plots and
the live ipywidgets explorers that redraw them (ipywidgets is imported only when an explorer
is built).
"""
