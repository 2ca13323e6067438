"""The omnimesh Python client (Client, AsyncClient; see omnimesh.client) over the omnimesh.v1 gRPC contract, whose
generated stubs live in omnimesh.v1 beside the .proto files."""
from omnimesh.client import AsyncClient, Client, MeshInfo
from omnimesh.errors import (DeadlineExceeded, FieldViolation, InvalidArgument, OmnimeshError, ResourceExhausted,
                             Unauthenticated, Unavailable, Unimplemented)
from omnimesh.events import (AudioDelta, AudioFailed, Done, Event, ReasoningDelta, Reply, TextDelta, TokenLogprob,
                             TopLogprob, Usage, wav_bytes)
from omnimesh.messages import Audio, Image, Media, Message, Sampling, Video
from omnimesh.transcripts import Language, Partial, Transcript, TranscriptReply

__all__ = ["AsyncClient", "Audio", "AudioDelta", "AudioFailed", "Client", "DeadlineExceeded", "Done", "Event",
           "FieldViolation", "Image", "InvalidArgument", "Language", "Media", "MeshInfo", "Message", "OmnimeshError",
           "Partial", "ReasoningDelta", "Reply", "ResourceExhausted", "Sampling", "TextDelta", "TokenLogprob", "TopLogprob",
           "Transcript", "TranscriptReply", "Unauthenticated", "Unavailable", "Unimplemented", "Usage", "Video",
           "wav_bytes"]
