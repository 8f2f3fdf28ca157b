package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// mintToken signs a buyer token for user, valid until exp.
func mintToken(secret []byte, user string, exp time.Time) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   user,
		ExpiresAt: jwt.NewNumericDate(exp),
		IssuedAt:  jwt.NewNumericDate(time.Now()),
	})
	return t.SignedString(secret)
}

func runToken(_ context.Context, cfg *Config, stdout, _ io.Writer) error {
	tok, err := mintToken([]byte(cfg.JWTSecret), cfg.User, time.Now().Add(cfg.TTL))
	if err != nil {
		return fmt.Errorf("signing token: %w", err)
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
