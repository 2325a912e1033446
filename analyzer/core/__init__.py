"""Basics every layer uses: errors, packaged resources, time, formatting, text made safe."""
