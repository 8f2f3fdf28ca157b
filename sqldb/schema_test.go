package sqldb

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// wantStatements is the SHA-256 of each schema version's statements, in
// each dialect, as the code of 854485c rendered them (before the
// migrations were laid out in files of their own). A version, once
// released, never changes: a database migrated by this code runs exactly
// the statements one migrated by 854485c's ran, so both have the same
// schema. New versions are added below as they come.
var wantStatements = map[int][2]string{ // version: postgres, sqlite
	1:  {"a34c4386e751ad7f027a9ca927598a5adb63f47db60eda48b9f523e22f0767f8", "fb51ca2e82d87a8d11dadadb2f64ac7009c4602f74f432cd93d67ddfd0a23160"},
	2:  {"8c135be689b56f7d9f5b015606fb5c1879047d237493d17a58731b154d3cc500", "5fbbeadc89e2d958235a8f508052a845ca8864565c5caa189768e9f774c5f8f9"},
	3:  {"f2364223ca75ae2cabfa115718e28929dc72520c2be3f78781606f04aed94242", "12f0ae6ae6c269c3784daaeafcf7fe86b24b792475144abef2e8677d904a2c00"},
	4:  {"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "455900b77183341db67d34c16ca0051861a54a9b4a3e4b1a72d2769749f362ce"},
	5:  {"c6f36452e8093e519ca2871b17d259489e32027caa66e6da7efe270bca4ea6b7", "d966828ee75be00220088bc4099794e0508f160e0b673c64078b472ce10ed4d7"},
	6:  {"22d03531a6b31e696273187ef09c4e687ccd5c42ca5beed89bbc949a9583a2ba", "363faa8e3c4a849f47a4144ad2e9ec41e69f333f6f9d0f2d6c3f5cdb45be5ef7"},
	7:  {"8672c48e0d4725825da52782fee4116d2ec74ece2f89ff881f9d7c2f626012d4", "51d706873f2b2166a4b8ed3792e842527da927f2ec397703bc8eee14a4a33c97"},
	8:  {"02d4d46757e0494af83409865a531d8dce8ebbc80b442b481e9b7e60657a5923", "1a62d04528955ab08bca05badcc21c41aa6cb355d710f394a7b4d0a0f207ace5"},
	9:  {"2207d0d4914b44fc4904f1322348d88fcc526e771f799a3bfeeea74e1acc7d04", "93a13adf40a3f551f9ba35052e401784e02d1770ce6b45b004713724fcfa3a75"},
	10: {"c2022e7b8c7ea06624a951c72582d7a694cafcb673188eb566c21dd80d5d5d12", "c2022e7b8c7ea06624a951c72582d7a694cafcb673188eb566c21dd80d5d5d12"},
	11: {"ec536e72851b3a9ac782e6cb5a686da83b7b537409fd71d5b01bf32d1962ff02", "701acda9d75d61184981ad57ac7a87d8af910fb7f80fd7a2c951db7275f7940d"},
	12: {"c420287c162e7c37e75b5d8ec0b770181f1d7ee8c8f8eb4aca542e4794006c4a", "9e671a5d4ddbbb5a1b3d7fb031d25f79e851b55acd9bd167e19d9ff0b81713c9"},
	13: {"9564be2ba8b583ec4764b23cb820e751e6cc5d94acd501604e903f216182dc0f", "6e9e340c1520b2a58f4870d1431a21a03a57ae6314cedd2ee6cf8265eba3a04a"},
	14: {"ac6fbf411ebce430e26d8eeeb8806868dfafad806cecd36f5781d11bda26ff28", "851294ff47dde2a6ea988a11a743783d6708decda27fce0a649fef705b53defb"},
	15: {"81e0e922e376f1b6e69e49390cb0e93e2538546c1320328d20ebfb4247f17ec7", "d7458d014cbcae4bc3f5fc658880464310e171ef8761f96bb01edc2fe36f7743"},
	16: {"4a5f1f6ab0236bc75bc082cada8de5a530b9253d0626b31cb51f598ab81c72dd", "7a2e1f4dff1fd6db30fbeddcc7e4a06ee5a7c52221087bb204ba3be769cd6cbf"},
	17: {"f1e8b8136a78555648dba0568926cf6c2b7d174f8c0290e526bb90abc7672c4c", "192f5990b9f67b8d2ee706f2a4ea0cce1bcf380d4a21c720351a44198546a668"},
	18: {"75d08fce22d12b98bdf54f3e60aae7679b0f0641d77dbbe397c983e059de8c60", "54ae0792364dc454e1a3a67e8652c845dd9878c582918741e530c53c971f9e1e"},
}

// TestMigrationsUnchanged: every released schema version renders, in each
// dialect, the very statements it rendered when it was released.
func TestMigrationsUnchanged(t *testing.T) {
	seen := map[int]bool{}
	for _, m := range migrations {
		seen[m.version] = true
		want, ok := wantStatements[m.version]
		if !ok {
			t.Errorf("version %d: no recorded hash; record its statements' hashes in wantStatements", m.version)
			continue
		}
		for i, dialect := range []string{DialectPostgres, DialectSQLite} {
			sum := sha256.Sum256([]byte(strings.Join(m.statements(dialect), "\x00")))
			if got := hex.EncodeToString(sum[:]); got != want[i] {
				t.Errorf("version %d, %s: statements hash %s, want %s", m.version, dialect, got, want[i])
			}
		}
	}
	for v := range wantStatements {
		if !seen[v] {
			t.Errorf("version %d: recorded but gone from migrations", v)
		}
	}
}
