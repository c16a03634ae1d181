module github.com/agentstream/agentstream

go 1.26.8
