module github.com/spacesandbox/space

go 1.26

require (
	connectrpc.com/connect v1.19.1
	google.golang.org/protobuf v1.36.12
)
