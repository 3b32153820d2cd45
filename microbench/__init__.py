"""Hardware characterization: device sources, runners, timing, analytic models, records."""
