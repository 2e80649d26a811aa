"""Reports rebuilt from accepted rows."""
