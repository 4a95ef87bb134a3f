// Tests of BorrowedScopes: loans are known by the scope lent, not by its name,
// a loan grows in place only while one node alone holds it, and its lists are
// kept in mapped pages.
#include "hiertag/passes/borrowed_scopes.h"

#include <memory_resource>
#include <string_view>
#include <vector>

#include "graph_test_support.h"
#include "hiertag/core/export/mapped_memory.h"
#include "hiertag/core/export/scope_names.h"

namespace hiertag {
namespace {

using torch::jit::Node;
using torch::jit::Scope;
using torch::jit::ScopePtr;

class BorrowedScopesTest : public testing::GraphTest {
 protected:
  void SetUp() override {
    Parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  return (%b)
)IR");
    SetScope("a", layer0_);
    SetScope("b", layer0_);
  }

  ScopePtr root_ = c10::make_intrusive<Scope>();
  ScopePtr net_ = testing::InstanceScope(root_, 0, "pkg.Net::");
  ScopePtr layer0_ = testing::InstanceScope(net_, 2, "pkg.Layer::layers.0");
  ScopePtr layer1_ = testing::InstanceScope(net_, 5, "pkg.Layer::layers.1");
  ScopePtr layer2_ = testing::InstanceScope(net_, 8, "pkg.Layer::layers.2");
};

TEST_F(BorrowedScopesTest, ALoanOneNodeAloneHoldsGrowsInPlace) {
  // Check that sharing one node with two calls, one at a time, keeps one loan that lists both.
  Node* a = NodeOf("a");
  ASSERT_TRUE(borrowed_.ShareWith(a, layer1_));
  const Scope* lent = a->scope().get();  // not held: a holder more would make the loan shared
  EXPECT_EQ(std::string_view(lent->name().toUnqualString()), kBorrowedScopeName);

  ASSERT_TRUE(borrowed_.ShareWith(a, layer2_));

  EXPECT_EQ(a->scope().get(), lent);
  const BorrowedScopes::Loan* loan = LoanOf("a");
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, layer0_);
  EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{layer1_, layer2_}));
}

TEST_F(BorrowedScopesTest, ALoanTwoNodesHoldIsCopiedNotGrown) {
  // Check that a node sharing a lent scope with another node gets a loan of its own, the other's unchanged.
  Node* a = NodeOf("a");
  Node* b = NodeOf("b");
  ASSERT_TRUE(borrowed_.ShareWith(a, layer1_));
  b->setScope(a->scope());

  ASSERT_TRUE(borrowed_.ShareWith(a, layer2_));

  EXPECT_NE(a->scope(), b->scope());
  EXPECT_EQ(std::string_view(a->scope()->name().toUnqualString()), kBorrowedScopeName);
  ASSERT_NE(LoanOf("a"), nullptr);
  ASSERT_NE(LoanOf("b"), nullptr);
  EXPECT_EQ(LoanOf("a")->shared_with, (BorrowedScopes::Scopes{layer1_, layer2_}));
  EXPECT_EQ(LoanOf("b")->shared_with, (BorrowedScopes::Scopes{layer1_}));
}

TEST_F(BorrowedScopesTest, AScopeOfTheBorrowedNameNotLentHereIsNoLoan) {
  // Check that loans are told apart by the scope lent: one of the same name from elsewhere is none of them.
  BorrowedScopes other;
  ASSERT_TRUE(other.ShareWith(NodeOf("b"), layer1_));
  ASSERT_TRUE(borrowed_.ShareWith(NodeOf("a"), layer2_));
  ScopePtr by_name = layer0_->push(c10::Symbol::scope(std::string(kBorrowedScopeName)));

  EXPECT_EQ(borrowed_.Find(NodeOf("b")->scope()), nullptr);
  EXPECT_EQ(borrowed_.Find(by_name), nullptr);
  ASSERT_NE(LoanOf("a"), nullptr);
  EXPECT_EQ(LoanOf("a")->shared_with, (BorrowedScopes::Scopes{layer2_}));
  EXPECT_EQ(Restore(), 1);
  EXPECT_EQ(NodeOf("a")->scope(), layer0_);
  EXPECT_NE(NodeOf("b")->scope(), layer0_);  // the other's loan: not this one's to restore
}

TEST_F(BorrowedScopesTest, ALoansListsAreKeptInItsPoolNotOnTheHeap) {
  // Check that a loan lent (grown in place or copied) keeps its lists in mapped pages, not the default resource.
  Node* a = NodeOf("a");
  Node* b = NodeOf("b");
  size_t mapped = MappedBytes();
  ASSERT_TRUE(borrowed_.ShareWith(a, layer1_));
  b->setScope(a->scope());
  ASSERT_TRUE(borrowed_.ShareWith(a, layer2_));  // copied: b holds the first loan too

  EXPECT_GT(MappedBytes(), mapped);
  for (const char* name : {"a", "b"}) {
    const BorrowedScopes::Loan* loan = LoanOf(name);
    ASSERT_NE(loan, nullptr) << name;
    for (const BorrowedScopes::Scopes* list : {&loan->shared_with, &loan->spans, &loan->folded_from}) {
      EXPECT_FALSE(list->get_allocator().resource()->is_equal(*std::pmr::get_default_resource())) << name;
    }
  }
  BorrowedScopes::Loan made = borrowed_.NewLoan(layer0_, layer0_);
  made = *LoanOf("a");  // a copy assigned to a new loan is kept in the pool too
  EXPECT_EQ(made.shared_with, (BorrowedScopes::Scopes{layer1_, layer2_}));
  EXPECT_FALSE(made.shared_with.get_allocator().resource()->is_equal(*std::pmr::get_default_resource()));
}

}  // namespace
}  // namespace hiertag
