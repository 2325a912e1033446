"""Reporters: Markdown, HTML and charts from the models; one output writer."""
