"""The decoder engine shared by the thinker and the talker: schedule() -> run() -> postprocess()."""
