"""The audio stage: the AuT encoder and its log-mel front end."""
