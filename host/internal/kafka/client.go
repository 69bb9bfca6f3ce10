package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Config says how to reach the cluster.
type Config struct {
	Brokers  []string
	ClientID string
	TLS      TLSConfig
	SASL     SASLConfig
	Logger   *slog.Logger
	// ConnectTimeout is how long a client waits at start for the cluster to answer before the
	// task fails with an error naming the brokers and the last failure. Default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// TLSConfig enables TLS when Enable is set.
type TLSConfig struct {
	Enable             bool
	CAFile             string // PEM bundle of the CAs to trust; empty: the system's
	CertFile, KeyFile  string // client certificate, for mutual TLS
	InsecureSkipVerify bool
}

// SASLConfig enables SASL when Mechanism is set: "plain", "scram-sha-256" or "scram-sha-512".
type SASLConfig struct {
	Mechanism string
	User      string
	Password  string
}

// Header is a record header.
type Header struct{ Name, Value []byte }

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (c Config) opts() ([]kgo.Opt, error) {
	if len(c.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	if c.Logger != nil {
		opts = append(opts, kgo.WithLogger(slogLogger{c.Logger}))
	}
	if c.TLS.Enable {
		tc := &tls.Config{InsecureSkipVerify: c.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if c.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: tls ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka: tls ca_file %s holds no PEM certificate", c.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		if c.TLS.CertFile != "" || c.TLS.KeyFile != "" {
			cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: tls client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch strings.ToLower(c.SASL.Mechanism) {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: c.SASL.User, Pass: c.SASL.Password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASL.User, Pass: c.SASL.Password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASL.User, Pass: c.SASL.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("kafka: unknown SASL mechanism %q (plain, scram-sha-256, scram-sha-512)", c.SASL.Mechanism)
	}
	return opts, nil
}

// slogLogger adapts franz-go's logger to slog; its info chatter goes to debug.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	}
	s.l.Log(context.Background(), lv, msg, append([]any{"component", "kafka"}, keyvals...)...)
}
