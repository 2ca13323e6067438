"""An OpenAI-compatible HTTP front (chat completions, speech, transcriptions, models) over the gateway's gRPC API."""
