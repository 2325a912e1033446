"""Commands that follow growing logs (watch)."""
