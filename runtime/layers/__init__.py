"""Model building blocks several stages share (each stage still loads only its own weights)."""
