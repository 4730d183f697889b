// Package extproc turns the traffic a gateway's Envoy proxies into the
// core's request lifecycle: an external processor
// (envoy.service.ext_proc.v3) that Envoy's ext_proc HTTP filter streams
// each HTTP request to, in observability mode, so that a gateway whose
// router posts no events (llm-d's inference scheduler) still gives the
// controller its demand. narwhal-core serves it on extproc.listen
// (docs/llm-d.md shows the filter's configuration).
//
// # What is reported
//
// One stream is one HTTP request. Only a POST whose path ends in
// /completions (the OpenAI-compatible /v1/completions and
// /v1/chat/completions that vLLM and SGLang serve, under any prefix) is
// reported; any other request is left alone. Every call is stamped with
// the processor's clock when the message arrives:
//
//	request headers                 OfferStarted (the arrival)
//	request body's end              OfferSized: body bytes / 4 as the input
//	                                estimate, the requested output from
//	                                max_completion_tokens, else max_tokens
//	                                (0 when neither is set)
//	response headers, status 429    RefusedSized (a scheduler shedding load)
//	other status outside 2xx        Failed, no first token
//	first response body byte        FirstToken, when the response is
//	                                server-sent events (streamed)
//	response's end, streamed        Tokenized with the usage block's
//	                                prompt_tokens (when it differs from the
//	                                estimate), then Completed with its
//	                                completion_tokens, or else the count of
//	                                data events
//	response's end, not streamed    Tokenized only: its first byte is its
//	                                last, so it has no first-token time to
//	                                measure; its demand was counted at
//	                                arrival
//	stream closed before either end OfferAbandoned while the body was being
//	                                read, Expired after (the client went
//	                                away, or Envoy reset the request), with
//	                                the first token's time if one came
//
// Each stream's outcome is counted in narwhal_extproc_streams_total, and
// a call the core refuses (a count above events.max_tokens, evidence too
// old) in narwhal_extproc_events_refused_total.
//
// # Choices where nothing said
//
//   - Bodies are never buffered: max_tokens, prompt_tokens and
//     completion_tokens are read by a scanner that keeps 96 bytes across
//     chunks, and a server-sent-events stream is counted by line starts.
//     A key's quoted name followed by a colon and a plain integer is
//     taken wherever it is; the last one wins (a nested key of the same
//     name with an integer value would be read too).
//   - vLLM and SGLang send one token per data event unless asked to
//     batch them; without a usage block (stream_options.include_usage)
//     the count of data events is the output, within a token or two
//     (the role-only first event, the finish event).
//   - The filter's processing mode measured in full is headers SEND and
//     bodies STREAMED (docs/llm-d.md). With a body mode NONE, which Envoy
//     names in the first message's protocol_config, a request is sized
//     by its Content-Length and its response counts as demand only; with
//     response headers skipped, a response body is a success, streamed
//     when it reads as server-sent events. A stream that closes after a
//     2xx header and no body (a response body mode NONE the processor
//     was not told of) is reported expired.
//   - Observability mode is the intended one (Envoy does not wait for the
//     processor, and ignores its answers); outside it each message is
//     answered "continue unchanged", which adds a round trip to every
//     message of every request.
//   - The stream's time in Envoy is what is measured: TTFT from the
//     request headers reaching the gateway to the first response byte
//     leaving the upstream, which includes the scheduler's own latency.
//     A client that goes away is reported when Envoy closes the stream,
//     in observability mode up to its deferred_close_timeout (5 s by
//     default) later.
//   - A stream is authenticated by its "authorization" metadata with the
//     routers' token; one that fails is refused (Unauthenticated) before
//     anything is read. A stream open longer than events.max_request_s is
//     ended (the core would refuse its events) and its request reported
//     expired. Streams cut while the server stops are not reported.
//
// Not tested against a running Envoy (none is packaged for Debian, where
// this project's CI runs): the tests play Envoy's side of the protocol
// with its generated gRPC client, message by message as the filter
// sends them in both modes.
package extproc
