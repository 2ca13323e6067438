"""Media decoding at the gateway: audio and video content parts into what the stages consume."""
