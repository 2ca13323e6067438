"""The decoder engine every decoder stage runs on: EngineLoop drives a StepCore (docs/engine.md); TokenCore is the
token engine (schedule() -> run() -> postprocess()) the thinker uses, the talker brings its own SpeechCore."""
