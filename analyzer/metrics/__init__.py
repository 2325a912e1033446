"""What a metric is (one SQL file) and how its results become rows."""
